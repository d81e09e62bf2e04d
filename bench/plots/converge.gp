# bench/converge, two panels against the RTT, one line per path (the engine,
# thick and black, and each libvirt-python pool): above, seconds to
# convergence; below, the client's own CPU per converged proxy (the engine's
# process, or the script with its children; the daemons on neither side),
# the figure the engine controls where the machine's CPU bounds the time.
# The engine's rows are labelled engine_warm and engine_cold (figures::cell
# makes labels one word). Variables: csv, png, paths (the CSV's other path
# labels, blank-separated; scripts/bench).
set datafile separator ","
set terminal pngcairo size 960,960 noenhanced
set output png
set multiplot layout 2,1
set xlabel "round-trip time to the host (ms)"
set key outside right top
set grid
set yrange [0:*]
set offsets graph 0.05, graph 0.05, 0, 0
# One path's rows at a time (a row of another path between two of its rows
# would break its line).
rows(p) = sprintf("< grep -F ',%s,' '%s'", p, csv)
set title "bench/converge: seconds until every proxy runs (median per RTT; lower is better)"
set ylabel "seconds to convergence"
plot rows("engine_warm") using 1:3 with linespoints lw 3 pt 7 ps 1.5 lc rgb "black" title "engine warm", \
     rows("engine_cold") using 1:3 with linespoints lw 3 dt 2 pt 6 ps 1.5 lc rgb "black" title "engine cold", \
     for [p in paths] rows(p) using 1:3 with linespoints pt 7 title p
# Columns: own_ms_per_proxy is the 7th (bench/converge.cpp, the figures' header).
set title "the client's own CPU per converged proxy, daemons left out (median per RTT)"
set ylabel "CPU ms per converged proxy"
plot rows("engine_warm") using 1:7 with linespoints lw 3 pt 7 ps 1.5 lc rgb "black" title "engine warm", \
     rows("engine_cold") using 1:7 with linespoints lw 3 dt 2 pt 6 ps 1.5 lc rgb "black" title "engine cold", \
     for [p in paths] rows(p) using 1:7 with linespoints pt 7 title p
unset multiplot
