"""Service-side planning: user options -> PlanOptions, the memory model, the layout search, suggestions, dry-run measurement, verify."""
