mod fixtures;
mod settings;
