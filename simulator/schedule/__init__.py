"""Schedules: generators that emit a TaskGraph (plain data) for the engine to run."""

from simulator.schedule.taskgraph import CommSpec, Task, TaskGraph

__all__ = ["CommSpec", "Task", "TaskGraph"]
