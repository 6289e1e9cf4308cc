"""What operators run and read, outside any caller's request: the read-only overview of the
sequences (``overview``), work done ahead of time or on a schedule (``maintenance``) and the
issue statistics per minute (``stats``)."""
