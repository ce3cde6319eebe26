"""Reports of a simulated step: Gantt charts, Perfetto/Chrome traces, memory and link plots,
a Markdown summary, and side-by-side comparisons of runs. Each function reads the trace
DataFrame (and the summary) and writes files; nothing here simulates."""
