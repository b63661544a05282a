"""The one description of a training job that every feature reads: model, layout, batch, precision, sharding."""
