# bench/scale against the number of proxies (log scale), one run per count
# (scripts/bench: SCALE_COUNTS): at rest, CPU (cores) and RSS per proxy
# (KiB, the test driver's heap in it and taken out); converging, seconds per
# 1,000 proxies (flat = linear growth) and the reload of 1%; answering,
# ls proxies, a metrics scrape and a status query (ms; the goal is 1 s).
# Variables: csv, png.
set datafile separator ","
set terminal pngcairo size 960,1200 noenhanced
set output png
set multiplot layout 3,1 title "bench/scale: test-driver hosts, one per 100 proxies"
set logscale x
set xlabel "proxies"
set grid
set key top left

set title "at rest after convergence"
set ylabel "CPU at rest (cores)"
set y2label "RSS per proxy (KiB)"
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
plot csv skip 1 using 1:5 with linespoints pt 7 lw 2 title "CPU at rest (cores)", \
     '' skip 1 using 1:6 axes x1y2 with linespoints pt 5 lw 2 title "peak RSS per proxy (KiB)", \
     '' skip 1 using 1:15 axes x1y2 with linespoints pt 4 lw 2 title "less the test driver's heap (KiB)"

set title "converging"
set ylabel "seconds"
unset y2label
unset y2tics
set ytics mirror
plot csv skip 1 using 1:($4 * 1000 / $1) with linespoints pt 7 lw 2 title "converge, s per 1,000 proxies", \
     '' skip 1 using 1:23 with linespoints pt 5 lw 2 title "reload of 1%, until back (s)", \
     '' skip 1 using 1:($22 / 1000) with linespoints pt 4 lw 2 title "reload of 1%, answered (s)"

set title "answering (goal: 1,000 ms at 100,000 proxies)"
set ylabel "ms"
set logscale y
set yrange [0.1:10000]
plot csv skip 1 using 1:16 with linespoints pt 7 lw 2 title "ls proxies through the node actor", \
     '' skip 1 using 1:31 with linespoints pt 3 lw 2 title "the same with the details (as --json)", \
     '' skip 1 using 1:33 with linespoints pt 2 lw 2 title "caf-shell -c 'ls proxies' (process)", \
     '' skip 1 using 1:19 with linespoints pt 6 lw 2 title "caf-shell -c 'ls proxies' --json (process)", \
     '' skip 1 using 1:20 with linespoints pt 5 lw 2 title "GET /metrics", \
     '' skip 1 using 1:7 with linespoints pt 4 lw 2 title "status query (in process)", \
     1000 with lines dt 2 lw 1 title "1 s"
unset multiplot
