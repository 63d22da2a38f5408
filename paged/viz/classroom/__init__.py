"""A class that answers together: students' browsers follow the lecturer's lesson and frame,
answer each question on their own device, and the lecturer sees the live distribution, then
reveals (docs/classroom.md). ``rooms`` holds the state, ``routes`` puts it on the app's server."""
