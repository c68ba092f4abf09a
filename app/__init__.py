"""DSpark Studio: the Qt desktop front end. Only ``app.worker`` touches MLX."""
