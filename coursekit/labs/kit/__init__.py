"""Helpers every lab shares: profiles, experiments as jobs, results, plots, claims."""
