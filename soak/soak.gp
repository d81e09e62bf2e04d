# The soak's timeline (soak/run.cpp says its columns, soak/checked_run.cpp
# writes the CSV and runs this):
#   gnuplot -e "csv='DIR/timeline.csv'; out='DIR/timeline.svg'" soak/soak.gp
set datafile separator ','
set terminal svg size 1100,500 dynamic background rgb 'white'
set output out
set title 'soak: proxies in rotation, hosts held by the nemesis'
set xlabel 'seconds since the engine started'
set ylabel 'proxies'
set y2label 'hosts held / violations'
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
set key outside right
plot csv every ::1 using 1:2 with lines lw 1 dt 2 title 'declared', \
     csv every ::1 using 1:4 with lines lw 2 title 'in rotation', \
     csv every ::1 using 1:5 with steps lw 1 title 'links up', \
     csv every ::1 using 1:6 axes x1y2 with steps lw 2 title 'hosts held', \
     csv every ::1 using 1:7 axes x1y2 with steps lw 1 title 'violations'
