"""The context-proxy benchmark (`python -m bench`).

Everything the comparison needs runs on 127.0.0.1 in its own process: a mock
upstream, three bare pass-through floors and the proxy itself. The load
generator and the report run in the bench process. Figures are ratios taken
within one run, because the 2-core machines this runs on are noisy.
"""
