mod agents;
mod fixtures;
mod settings;
mod teams;
