# bench/converge: seconds to convergence per path against the RTT, one line
# per path (the engine, thick and black, and each libvirt-python pool).
# Variables: csv, png, paths (the CSV's other path labels, blank-separated;
# scripts/bench).
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
# One path's rows at a time (a row of another path between two of its rows
# would break its line).
rows(p) = sprintf("< grep -F ',%s,' '%s'", p, csv)
plot rows("engine") using 1:3 with linespoints lw 3 pt 7 ps 1.5 lc rgb "black" title "engine", \
     for [p in paths] rows(p) using 1:3 with linespoints pt 7 title p
