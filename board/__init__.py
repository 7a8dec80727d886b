"""What is shown over the results: boards, tables, result pages, figures, aggregates and their API (above
``submissions``, below ``best_of_n``; see docs/layout.md)."""
