"""Tables that count what tenants use (app/db/models/ holds its cap of modules: metering gets a folder)."""
