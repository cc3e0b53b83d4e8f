"""KV memory: pages and their pool, the radix prefix cache, the store, and how a forward reads them."""
