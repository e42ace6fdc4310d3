from gpu_triage.cli import main

raise SystemExit(main())
