# bench/scale: the engine at rest against the number of proxies: CPU (cores,
# left axis) and RSS per proxy (KiB, right axis). Variables: csv, png.
set datafile separator ","
set terminal pngcairo size 960,600 noenhanced
set output png
set title "bench/scale: at rest after convergence, test-driver host"
set xlabel "proxies"
set ylabel "CPU at rest (cores)"
set y2label "RSS per proxy (KiB)"
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
set grid
set key top left
plot csv skip 1 using 1:5 with linespoints pt 7 lw 2 title "CPU at rest (cores)", \
     '' skip 1 using 1:6 axes x1y2 with linespoints pt 5 lw 2 title "RSS per proxy (KiB)"
