from pipelines.eval.claims.runner import main

main()
