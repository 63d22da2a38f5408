"""The paper page's numbers: simulated results, the policies run in parallel, the essay's corrections."""
