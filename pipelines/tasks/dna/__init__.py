"""The DNA family: what the tasks share (:mod:`~pipelines.tasks.dna.base`), the language models (causal and
masked), segmentation and classification, their baselines and the DNA predictors."""
