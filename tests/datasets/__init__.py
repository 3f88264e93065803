"""Small, real data sets written on the fly for the recipe, notebook and SLURM tests.

Nothing here downloads: each generator writes files in the exact format the real data set
uses (tfds' own builders produce the tfds directories), filled with generated images whose
class can be learned (a pattern per class plus noise).
"""
