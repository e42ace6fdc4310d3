"""Sources of ticks: live (NVML + psutil), simulated, replay. See base.Source."""
