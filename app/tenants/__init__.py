"""Tenants: who a caller is (its API key's tenant) and how many requests each has in flight here."""
