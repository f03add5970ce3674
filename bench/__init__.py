"""fluxfs benchmarks: every scenario runs fluxfs and the alternatives side by side (see BENCH.md rules)."""
