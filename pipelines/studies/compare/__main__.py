from pipelines.studies.compare.run import main

if __name__ == "__main__":
    main()
