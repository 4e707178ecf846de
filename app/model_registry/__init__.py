"""The models a deployment serves: their declarations (spec) and how settings become a registry (loading)."""
