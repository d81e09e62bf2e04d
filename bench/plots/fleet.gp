# bench/fleet: a cold fleet of real VMs, one per host: when each host's
# images were ready, its VM started, its address known and its proxy
# forwarding (the engine also: in rotation), every round, engine and the
# virsh script side by side (with --stage the engine a second time with
# engine.stage-dir, further left). Variables: csv, png.
set datafile separator ","
set terminal pngcairo size 960,600 noenhanced
set output png
set title "bench/fleet: seconds from a cold start, per host (engine left, script right)"
set xlabel "host"
set ylabel "seconds from the run's start"
set xtics 1
set grid
set key outside right
set yrange [0:*]
set offsets 0.5, 0.5, 0, 0
h(s) = strcol(3)[3:] + 0
plot csv skip 1 using (strcol(2) eq "engine" ? h(0) - 0.15 : NaN):5 with points pt 4 lc 1 title "engine: images ready", \
     '' skip 1 using (strcol(2) eq "engine" ? h(0) - 0.15 : NaN):6 with points pt 6 lc 2 title "engine: VM started", \
     '' skip 1 using (strcol(2) eq "engine" ? h(0) - 0.15 : NaN):7 with points pt 8 lc 3 title "engine: address", \
     '' skip 1 using (strcol(2) eq "engine" ? h(0) - 0.15 : NaN):9 with points pt 7 lc 7 title "engine: in rotation", \
     '' skip 1 using (strcol(2) eq "engine-copy" ? h(0) - 0.3 : NaN):5 with points pt 12 lc 1 title "engine, node copy: images ready", \
     '' skip 1 using (strcol(2) eq "engine-copy" ? h(0) - 0.3 : NaN):9 with points pt 13 lc 7 title "engine, node copy: in rotation", \
     '' skip 1 using (strcol(2) eq "script" ? h(0) + 0.15 : NaN):5 with points pt 5 lc 1 title "script: images ready", \
     '' skip 1 using (strcol(2) eq "script" ? h(0) + 0.15 : NaN):6 with points pt 7 lc 2 title "script: VM started", \
     '' skip 1 using (strcol(2) eq "script" ? h(0) + 0.15 : NaN):8 with points pt 9 lc 3 title "script: forwarding"
