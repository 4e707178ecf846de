"""Webhooks: endpoints a tenant registers, the events written with the final state of what they are about (the
outbox), their signatures, and their delivery with retries by whichever process is alive."""
