# bench/e2e: real VMs, seconds from the run's start per proxy: the engine's
# time to rotation and to forwarding, the virsh script's time to forwarding,
# every round. Variables: csv, png.
set datafile separator ","
set terminal pngcairo size 960,600 noenhanced
set output png
set title "bench/e2e: seconds from start until each proxy forwards / is in rotation"
set xlabel "proxy (in each run)"
set ylabel "seconds from the run's start"
set xtics 1
set grid
set key inside bottom right
set yrange [0:*]
set offsets 0.5, 0.5, 0, 0
plot csv skip 1 using (strcol(2) eq "engine" && $7 >= 0 ? $3 : NaN):7 with points pt 7 ps 1.5 title "engine: in rotation", \
     '' skip 1 using (strcol(2) eq "engine" ? $3 - 0.1 : NaN):6 with points pt 5 title "engine: forwarding", \
     '' skip 1 using (strcol(2) eq "virsh" ? $3 + 0.1 : NaN):6 with points pt 9 title "virsh script: forwarding"
