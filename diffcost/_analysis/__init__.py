"""_analysis"""
