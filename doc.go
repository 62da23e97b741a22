// Package tarn is the command line of a tarn program. Users define views in their own Go
// program and hand them to [Main], which provides the commands serve, demo, rebuild, migrate,
// status, reset and version, configured by flags, environment variables and a config file
// ([Config]).
package tarn
