"""The Conversations API: endpoints, service, the turn a response takes on a conversation, repository, schemas."""
