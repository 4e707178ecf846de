"""The Files API: uploads (purpose "batch"), the files batches write, their bytes in chunks in the database."""
