"""The subcommands' handlers: each ``run_*`` reads its argparse namespace, calls the domain packages (which
return data and strings), prints, and turns problems into exit statuses (a :class:`UserError` reaches
``cli.main``). ``cli.dispatch`` imports one of these modules lazily, so ``--help`` imports none of them."""
