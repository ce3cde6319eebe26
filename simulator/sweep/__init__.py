"""What-if studies: sweep specs expanded into scenarios, run on a local process pool or on Ray,
results stored by scenario hash (so a re-run resumes), pictures and delta tables, and a search
over parallel plans (``trainsim plan``) built on the same machinery."""
