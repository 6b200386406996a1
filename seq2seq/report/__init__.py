"""Reports: alignment plots and attention demonstrations for notebooks and write-ups."""
