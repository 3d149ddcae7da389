"""Socket-free policy: sharding, consistency rules, update rules, histograms."""
