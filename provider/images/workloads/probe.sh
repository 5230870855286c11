# Hardening probe, run by busybox sh inside a job's container: one `name=value` line per fact.
status() { grep "^$1:" /proc/self/status | tr -d ' \t' | cut -d: -f2; }
echo "capeff=$(status CapEff)"
echo "capbnd=$(status CapBnd)"
echo "nonewprivs=$(status NoNewPrivs)"
echo "seccomp=$(status Seccomp)"
echo "uid=$(id -u)"
echo "interfaces=$(ls /sys/class/net | tr '\n' ' ')"
echo "root_writable=$(touch /probe 2>/dev/null && echo yes || echo no)"
echo "tmp_fs=$(grep ' /tmp ' /proc/mounts | cut -d' ' -f3)"
echo "out_writable=$(touch /out/probe 2>/dev/null && rm /out/probe && echo yes || echo no)"
echo "pid1=$(cat /proc/1/comm)"
