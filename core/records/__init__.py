"""The committed records of a repository and where things live.

`layout` (paths, the bounded reader `read_text`, `find_repo`), `project` (.ai/project.yaml),
`taskgraph` (.ai/tasks.yaml and its graph), `jobs` (.ai/jobs/<job>.json), `repos` (the user's list
of repositories). Each record is read through its pydantic model.
"""
