"""Physics shared by the estimators and the simulated fake."""
