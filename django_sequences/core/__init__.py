"""Pure-Python building blocks: no Django import anywhere below this package."""
