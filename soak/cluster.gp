# The timeline of a soak of several nodes (soak/cluster_run.cpp says its
# columns, soak/checked_run.cpp writes the CSV and runs this):
#   gnuplot -e "csv='DIR/timeline.csv'; out='DIR/timeline.svg'" soak/cluster.gp
set datafile separator ','
set terminal svg size 1100,500 dynamic background rgb 'white'
set output out
set title 'soak of a cluster: the least rotation of a node, owned hosts, nodes, faults'
set xlabel 'seconds since the nodes started'
set ylabel 'proxies'
set y2label 'hosts / nodes / violations'
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
set key outside right
plot csv every ::1 using 1:2 with lines lw 1 dt 2 title 'declared', \
     csv every ::1 using 1:3 with lines lw 2 title 'least rotation', \
     csv every ::1 using 1:4 axes x1y2 with steps lw 1 title 'hosts owned', \
     csv every ::1 using 1:6 axes x1y2 with steps lw 1 title 'nodes member', \
     csv every ::1 using 1:7 axes x1y2 with steps lw 2 title 'hosts held', \
     csv every ::1 using 1:8 axes x1y2 with steps lw 1 dt 3 title 'etcd up', \
     csv every ::1 using 1:9 axes x1y2 with steps lw 1 title 'violations'
