from pipelines.studies.ltsf.run import main

if __name__ == "__main__":  # not when a --jobs worker (spawned) imports this module
    main()
