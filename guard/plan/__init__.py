"""guard plan: the layouts of a job that fit its GPUs, ranked by predicted step time."""
