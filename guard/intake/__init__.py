"""The one intake: whatever the user gives (paths, a launcher command line, argv, printed arguments, a Trainer's
arguments) becomes the job and what it was read from (guard.job.subject.Subject)."""
