"""Starting kerashvd jobs: the ``kerashvdrun`` command and :func:`kerashvd.run`."""
