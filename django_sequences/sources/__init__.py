"""Where numbers are persisted and leased. Each source commits its leases on its own."""
