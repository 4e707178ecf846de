"""A response's life in one place: every status change of its row, and the one ended step every way of ending it
goes through, with the effects the domains registered beside it at start-up."""
