# bench/upload: MiB/s per path into a libvirt volume, with the local unix
# socket (the ceiling of any transport) drawn across: the engine's link,
# virsh's transports, the engine's image fill over 1..N sessions, and a
# rollout to several hosts at once (MiB/s over every host together, the
# engine's fills against as many virsh vol-uploads); rows named disk_* are
# the same for a raw disk image, whose zeros go as holes (the fill) or as
# the file's holes (virsh --sparse). Variables: csv, png.
set datafile separator ","
set terminal pngcairo size 960,600 noenhanced
set output png
set title "bench/upload: image upload throughput (median; higher is better)"
set ylabel "MiB/s"
set style fill solid 0.6
set boxwidth 0.6
set grid ytics
set xtics rotate by -30 font ",9"
set bmargin 8
set rmargin 10
set yrange [0:*]
stats csv skip 1 using (strcol(1) eq "(d)_unix_socket_API" ? $2 : NaN) nooutput
ceiling = STATS_max
set arrow from graph 0, first ceiling to graph 1, first ceiling nohead dt 2 lw 2 lc rgb "red"
set label sprintf("unix-socket ceiling %.0f MiB/s", ceiling) at graph 0.02, first ceiling offset 0,0.8 tc rgb "red"
plot csv skip 1 using 0:2:xtic(1) with boxes notitle, \
     '' skip 1 using 0:2:(sprintf("%.0f", $2)) with labels offset 0,0.8 notitle
