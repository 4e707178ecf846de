"""Tables about the requests the API received rather than the objects they made (app/db/models/ holds its cap of
modules: these get a folder)."""
