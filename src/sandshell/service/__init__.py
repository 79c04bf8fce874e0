"""The HTTP service (`sandshell serve`): the API and the live web view, on the same session core.

`api` the FastAPI app and its routes; `server` puts the parts together and runs uvicorn;
`tasks` the queue, the workers and `place` (where a session runs); `store` task records on disk;
`models` one model shared fairly by many sessions; `chat` conversations; `feed` event streams
read from the recordings; `auth` the bearer token; `limits` request bounds and error sentences;
`web/` the page and its script (package data). Never imports Textual.
"""
