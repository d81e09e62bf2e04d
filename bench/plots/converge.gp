# bench/converge: seconds to convergence per path against the RTT, one line
# per path (the engine and each libvirt-python pool). Variables: csv, png,
# paths (the path labels of the CSV, blank-separated; scripts/bench).
set datafile separator ","
set terminal pngcairo size 960,600 noenhanced
set output png
set title "bench/converge: seconds until every proxy runs (median per RTT; lower is better)"
set xlabel "round-trip time to the host (ms)"
set ylabel "seconds to convergence"
set key outside right top
set grid
set yrange [0:*]
set offsets graph 0.05, graph 0.05, 0, 0
plot for [p in paths] csv skip 1 \
     using (strcol(2) eq p ? $1 : NaN):(strcol(2) eq p ? $3 : NaN) \
     with linespoints lw (p eq "engine" ? 3 : 1) pt 7 title p
