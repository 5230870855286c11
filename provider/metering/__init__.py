"""What a job used: cgroup samples, GPU samples, the job's parent cgroup."""
