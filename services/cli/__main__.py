from draflow.services.cli.main import main

raise SystemExit(main())
