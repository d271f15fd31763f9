"""`python -m proxy`: the `context-proxy` command line."""

from proxy.cli import main

raise SystemExit(main())
