"""Rate limits per tenant: requests and tokens per minute, in token buckets in this process or shared in Redis."""
