from pipelines.studies.claims.runner import main

if __name__ == "__main__":  # not when a --jobs worker (spawned) imports this module
    main()
