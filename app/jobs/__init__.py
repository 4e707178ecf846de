"""What runs where the model is: a generation job's execution loop, its lease (who owns it), its progress and event
batches, its final state, recovery and reconciliation, and its repository and telemetry."""
