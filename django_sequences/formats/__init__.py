"""Business-number formats: the template language, check digits and obfuscation. Pure Python
(no Django import), like ``core/``."""
